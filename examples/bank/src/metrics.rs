//! `GET /metrics`: tenure's metrics (see `tenure::telemetry`) in Prometheus's
//! text format, rendered by a route of the service itself rather than by the
//! exporter's own HTTP listener.

use std::sync::OnceLock;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The content type of Prometheus's text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4";

/// The process's Prometheus recorder, installed as the `metrics` facade's
/// global recorder on first use (a process has one; every router built after
/// that renders the same one).
///
/// # Errors
/// When another global recorder was installed first.
pub fn handle() -> Result<PrometheusHandle, String> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))
        })
        .clone()
}

/// The `/metrics` route.
pub fn routes(handle: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                // Without the exporter's listener nobody else drains the
                // histograms' buffers: do it before each scrape.
                handle.run_upkeep();
                ([(CONTENT_TYPE, TEXT_FORMAT)], handle.render()).into_response()
            }
        }),
    )
}
