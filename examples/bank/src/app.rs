//! The HTTP API.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tenure::{Attempt, Coordinator};

use crate::ledger::{Change, Ledger};

/// The largest amount one request may move (keeps every sum far from `i64`
/// overflow).
pub const MAX_AMOUNT: u64 = 1_000_000_000_000;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct Bank {
    /// Leases (and, in the layer, rate limits).
    pub tenure: Coordinator,
    /// The balances.
    pub ledger: Arc<Ledger>,
    /// TTL of an account's lease.
    pub lease_ttl: Duration,
    /// How long a change waits for the lease.
    pub lease_wait: Duration,
}

/// The routes, without the rate-limit layer. Every error answer is
/// `application/problem+json`, including the router's own (unknown route,
/// wrong method) and its extractors' (a path that is not UTF-8, a body over
/// the size limit).
pub fn routes(bank: Bank) -> Router {
    Router::new()
        .route("/accounts/{id}", get(get_account))
        .route("/accounts/{id}/deposit", post(deposit))
        .route("/accounts/{id}/withdraw", post(withdraw))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::map_response(errors_as_problems))
        .with_state(bank)
}

async fn no_route() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "no such route: GET /accounts/{id}, POST /accounts/{id}/deposit, POST /accounts/{id}/withdraw",
    )
}

async fn wrong_method() -> Response {
    // The router adds the `Allow` header.
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route (see the Allow header)",
    )
}

/// The longest error body of the framework kept as a problem's detail.
const MAX_DETAIL: usize = 512;

/// Turns any error answer that is not a problem yet (the framework's
/// extractor rejections are `text/plain`) into one, keeping its status, its
/// other headers (`Allow`) and its text as the detail.
async fn errors_as_problems(res: Response) -> Response {
    let status = res.status();
    let is_problem = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == tenure_http::PROBLEM_JSON.as_bytes());
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, MAX_DETAIL)
        .await
        .ok()
        .and_then(|b| String::from_utf8(b.to_vec()).ok())
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    let detail = text.unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
    let fresh = problem(status, &detail);
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    for (name, value) in fresh.headers() {
        parts.headers.insert(name.clone(), value.clone());
    }
    Response::from_parts(parts, fresh.into_body())
}

fn problem(status: StatusCode, detail: &str) -> Response {
    tenure_http::problem(status, detail).map(Body::from)
}

fn unavailable(detail: &str) -> Response {
    let mut res = problem(StatusCode::SERVICE_UNAVAILABLE, detail);
    res.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        HeaderValue::from_static("1"),
    );
    res
}

fn balance(id: &str, balance: i64) -> Response {
    axum::Json(serde_json::json!({ "id": id, "balance": balance })).into_response()
}

/// Account ids: 1 to 64 characters of `A-Z a-z 0-9 - _`. Errors are the
/// detail of a `400`.
fn check_id(id: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err("account ids are 1 to 64 characters of A-Z a-z 0-9 - _".into())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Amount {
    amount: u64,
}

fn parse_amount(body: &[u8]) -> Result<i64, String> {
    const EXPECTED: &str = "expected {\"amount\": N} with N a positive integer";
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("{EXPECTED}: {e}"))?;
    // serde would read a struct from an array too (`[5]`): only an object is
    // a request body.
    if !value.is_object() {
        return Err(format!("{EXPECTED}: the body is not a JSON object"));
    }
    let Amount { amount } =
        serde_json::from_value(value).map_err(|e| format!("{EXPECTED}: {e}"))?;
    if amount == 0 || amount > MAX_AMOUNT {
        return Err(format!("amount must be between 1 and {MAX_AMOUNT}"));
    }
    i64::try_from(amount).map_err(|_| "amount too large".into())
}

fn bad_request(detail: &str) -> Response {
    problem(StatusCode::BAD_REQUEST, detail)
}

async fn get_account(State(bank): State<Bank>, Path(id): Path<String>) -> Response {
    if let Err(detail) = check_id(&id) {
        return bad_request(&detail);
    }
    match bank.ledger.balance(&id).await {
        Ok(Some(b)) => balance(&id, b),
        Ok(None) => problem(StatusCode::NOT_FOUND, "no such account"),
        Err(e) => {
            tracing::error!(error = %e, "read failed");
            unavailable("the database is unavailable")
        }
    }
}

async fn deposit(State(bank): State<Bank>, Path(id): Path<String>, body: Bytes) -> Response {
    match (check_id(&id), parse_amount(&body)) {
        (Ok(()), Ok(amount)) => change(&bank, &id, amount, "deposit").await,
        (Err(detail), _) | (_, Err(detail)) => bad_request(&detail),
    }
}

async fn withdraw(State(bank): State<Bank>, Path(id): Path<String>, body: Bytes) -> Response {
    match (check_id(&id), parse_amount(&body)) {
        (Ok(()), Ok(amount)) => change(&bank, &id, -amount, "withdraw").await,
        (Err(detail), _) | (_, Err(detail)) => bad_request(&detail),
    }
}

/// The lease key of an account.
pub fn lease_key(id: &str) -> String {
    format!("bank:account:{id}")
}

/// The label of the lease a change takes: its account and route, e.g.
/// `account 42: POST /accounts/42/deposit` — what `tenure status` and
/// `tenure list` show beside this host and process while it holds the lease.
pub fn lease_label(id: &str, action: &str) -> String {
    format!("account {id}: POST /accounts/{id}/{action}")
}

/// One balance change (`action` names its route): under the account's
/// lease, labelled with the account and route, fenced by its token.
async fn change(bank: &Bank, id: &str, delta: i64, action: &str) -> Response {
    let lease = bank
        .tenure
        .lease(lease_key(id))
        .ttl(bank.lease_ttl)
        .watchdog(true)
        .label(lease_label(id, action));
    let guard = match lease.attempt_within(bank.lease_wait).await {
        Ok(Attempt::Acquired(guard)) => guard,
        Ok(Attempt::Held { .. }) => return unavailable("the account is busy; try again"),
        Err(e) => {
            tracing::error!(error = %e, "lease failed");
            return unavailable("the lease store is unavailable");
        }
    };
    let fence = guard.fence();
    let work = async {
        if delta > 0 {
            bank.ledger.open(id).await?;
        }
        bank.ledger.change(id, fence, delta).await
    };
    let outcome = guard.run(work).await;
    if let Err(e) = guard.release().await {
        // The lease expires on its own; the change itself is settled.
        tracing::warn!(error = %e, "lease release failed");
    }
    match outcome {
        Ok(Ok(Change::Applied { balance: b })) => balance(id, b),
        Ok(Ok(Change::Insufficient { balance })) => problem(
            StatusCode::CONFLICT,
            &format!("insufficient funds: the balance is {balance}"),
        ),
        Ok(Ok(Change::Missing)) => problem(StatusCode::NOT_FOUND, "no such account"),
        Ok(Ok(Change::Overflow)) => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the balance would overflow",
        ),
        Ok(Ok(Change::Stale)) => {
            unavailable("a newer lease holder changed the account first; nothing was applied")
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "change failed");
            unavailable("the database is unavailable; check the balance before retrying")
        }
        Err(e) => {
            tracing::error!(error = %e, "lease lost during a change");
            unavailable(
                "the account's lease was lost during the change; check the balance before retrying",
            )
        }
    }
}
