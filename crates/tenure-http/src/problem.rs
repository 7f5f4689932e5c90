//! `application/problem+json` responses (RFC 9457) for refusals and failures.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

/// The media type of the bodies.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// A problem response with `status` and a human-readable `detail`; services
/// behind the middleware can use it to answer in the same format.
///
/// ```
/// let res = tenure_http::problem(http::StatusCode::CONFLICT, "insufficient funds");
/// assert_eq!(res.status(), 409);
/// assert_eq!(res.headers()["content-type"], tenure_http::PROBLEM_JSON);
/// assert!(std::str::from_utf8(res.body()).unwrap().contains("\"detail\":\"insufficient funds\""));
/// ```
pub fn problem(status: StatusCode, detail: &str) -> Response<Bytes> {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    let mut res = Response::new(Bytes::from(body.to_string()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(PROBLEM_JSON),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_rfc9457_json() {
        let res = problem(StatusCode::TOO_MANY_REQUESTS, "slow \"down\"");
        assert_eq!(res.status(), 429);
        assert_eq!(res.headers()[http::header::CONTENT_TYPE], PROBLEM_JSON);
        let v: serde_json::Value = serde_json::from_slice(res.body()).expect("json");
        assert_eq!(v["status"], 429);
        assert_eq!(v["title"], "Too Many Requests");
        assert_eq!(v["detail"], "slow \"down\"");
        assert_eq!(v["type"], "about:blank");
    }
}
