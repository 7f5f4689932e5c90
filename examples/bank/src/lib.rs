//! A small bank service, built on tenure.
//!
//! - `GET /accounts/{id}` → `{"id": …, "balance": …}`;
//! - `POST /accounts/{id}/deposit` and `POST /accounts/{id}/withdraw` with
//!   `{"amount": N}` → the new balance; a withdrawal above the balance → `409`.
//!
//! Every balance change runs under a tenure lease on the account and is
//! written to PostgreSQL fenced by the lease's token (see [`ledger`]), so a
//! holder whose lease expired cannot overwrite a newer write. Requests are
//! rate-limited per client IP (sliding log, default 60/minute) by
//! [`tenure_http::RateLimitLayer`], trusting `X-Forwarded-For` (or, with
//! `--forwarded-header forwarded`, RFC 7239 `Forwarded`) only from
//! `--trusted-proxy` ranges. Every error — unknown routes, wrong methods and
//! bad bodies included — is `application/problem+json`. `GET /metrics`
//! answers tenure's metrics in Prometheus's text format (not rate-limited).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = bank::Config::new(
//!     "127.0.0.1:8080".parse()?,
//!     "redis://127.0.0.1:6379",
//!     "postgres://postgres@127.0.0.1/postgres",
//! );
//! let app = bank::app(&config).await?;
//! let listener = tokio::net::TcpListener::bind(config.listen).await?;
//! bank::serve(listener, app, std::future::pending()).await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod app;
pub mod config;
pub mod ledger;
pub mod metrics;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tenure::Coordinator;
use tenure::limit::{Algorithm, Quota};
use tenure_http::{ClientIp, RateLimitLayer};

pub use app::Bank;
pub use config::Config;
pub use ledger::Ledger;

/// Why the service could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// Connects to the stores and builds the router with its rate-limit layer,
/// and `/metrics` beside it.
pub async fn app(config: &Config) -> Result<Router, StartError> {
    let metrics = metrics::handle().map_err(StartError)?;
    let tenure = Coordinator::connect(config.backend.expose())
        .await
        .map_err(|e| StartError(format!("--backend: {e}")))?;
    let ledger = Ledger::connect(config.database_url.expose())
        .await
        .map_err(|e| StartError(format!("--database-url: {e}")))?;
    let quota = Quota::new(config.limit.count.get(), config.limit.period)
        .map_err(|e| StartError(format!("--limit: {e}")))?;
    // The usual Redis "sliding window" is a log of timestamps (a sorted set): exact,
    // never more than the limit in any window.
    let limiter = tenure.limiter(quota, Algorithm::SlidingLog);
    let trusted = config
        .trusted_proxies()
        .map_err(|e| StartError(format!("--trusted-proxy: {e}")))?;
    let clients = ClientIp::new(trusted).header(config.forwarded_header.into());
    let layer = RateLimitLayer::new(limiter, clients)
        .on_store_failure(config.on_limiter_failure.into())
        .budget(config.limit_budget);
    let bank = Bank {
        tenure,
        ledger: Arc::new(ledger),
        lease_ttl: config.lease_ttl,
        lease_wait: config.lease_wait,
    };
    // `/metrics` is merged after the layer: scrapes take no client's budget.
    Ok(app::routes(bank)
        .layer(layer)
        .merge(metrics::routes(metrics)))
}

/// Serves `app` on `listener` (with peer addresses for the rate limiter) until
/// `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
